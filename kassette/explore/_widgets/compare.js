// CompareView's view: one column per branch (steps down a frozen column), or transposed, one
// row per branch and a column per step; the first divergence named at the top and
// highlighted; values or diffs vs the baseline; steps alike in every branch folded to a line.
// Compact (the answer grid): each cell cut to two lines with "more"; the branches sorted,
// filtered and marked (keep, note) from the bar; a cell's model calls open as a conversation
// below the table. `h` is dom.js's, `conversationView` conversation.js's, prepended in Python.

const STEP_WIDTH = 84; // px: the step column (columns layout)
const COLUMN_WIDTH = 96; // px: a branch's narrowest column: 10 branches and the steps in 1,044 px
const BRANCH_WIDTH = 168; // px: the branch column (rows layout)
const STEP_COLUMN_WIDTH = 300; // px: a step's narrowest column (rows layout)
const COMPACT_BRANCH_WIDTH = 250; // px: the branch column of the answer grid

function lineDiff(lines) {
  return h(
    "pre",
    { class: "kx-cell kx-diff" },
    ...lines.map((line) =>
      h("span", { class: line.startsWith("+") ? "kx-add" : line.startsWith("-") ? "kx-del" : line.startsWith("@@") ? "kx-hunk" : "" }, line + "\n"),
    ),
  );
}

// a word diff: [op, text] pairs; "…" is an unchanged run shortened, its text a word count
function wordDiff(pairs) {
  return h(
    "div",
    { class: "kx-answer kx-diff kx-words" },
    ...pairs.map(([op, text]) =>
      op === "+" ? h("ins", { class: "kx-add" }, text)
      : op === "-" ? h("del", { class: "kx-del" }, text)
      : op === "…" ? h("span", { class: "kx-elided", title: `${text} unchanged` }, ` ⋯ ${text} ⋯ `)
      : text,
    ),
  );
}

// a run id that may break after its separators (a fan-out's `prefix.7` keeps its number)
function breakable(name) {
  return name.split(/(?<=[.\-_/])/).flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

function render({ model, el }) {
  el.classList.add("kassette-compare", "jupyter-widgets");
  const banner = h("div", { class: "kx-banner" });
  const modeSelect = h("select", { class: "kx-mode", "aria-label": "show" },
    h("option", { value: "values" }, "values"),
    h("option", { value: "diff" }, "diff vs baseline"));
  const valuesSelect = h("select", { class: "kx-values", "aria-label": "model calls as" },
    h("option", { value: "text" }, "answers"),
    h("option", { value: "json" }, "raw JSON"));
  const valuesLabel = h("span", { class: "kx-values-label" }, " model calls as ", valuesSelect);
  const baseSelect = h("select", { class: "kx-baseline", "aria-label": "baseline" });
  const layoutSelect = h("select", { class: "kx-layout", "aria-label": "layout" },
    h("option", { value: "columns" }, "a column per branch"),
    h("option", { value: "rows" }, "a row per branch"));
  const groupBox = h("input", { type: "checkbox", class: "kx-group" });
  const groupLabel = h("span", { class: "kx-group-label" });
  const hideBox = h("input", { type: "checkbox", class: "kx-hide-equal" });
  const hideLabel = h("span", { class: "kx-hide-label" });
  const compactBox = h("input", { type: "checkbox", class: "kx-compact" });
  const alignSelect = h("select", { class: "kx-align", "aria-label": "align" },
    h("option", { value: "answer" }, "answers"),
    h("option", { value: "first" }, "first calls"),
    h("option", { value: "step" }, "step ids"));
  const sortSelect = h("select", { class: "kx-sort", "aria-label": "sort branches by" });
  const descBox = h("input", { type: "checkbox", class: "kx-descending" });
  const queryInput = h("input", { type: "search", class: "kx-query", placeholder: "filter: temperature>1 kept word", "aria-label": "filter branches" });
  const queryNote = h("span", { class: "kx-query-note" });
  const stepBoxes = h("span", { class: "kx-columns" });
  const scroller = h("div", { class: "kx-scroll" });
  const talk = h("div", { class: "kx-talk" });
  el.append(
    h(
      "div",
      { class: "kx-root" },
      banner,
      h(
        "div",
        { class: "kx-bar" },
        "show ", modeSelect, valuesLabel, " align ", alignSelect, " baseline ", baseSelect, " ", layoutSelect, " ",
        h("label", {}, compactBox, " compact"), " ",
        h("label", {}, hideBox, hideLabel),
      ),
      h(
        "div",
        { class: "kx-bar kx-bar2" },
        h("label", {}, groupBox, groupLabel), " · steps ", stepBoxes, " · sort ", sortSelect, " ", h("label", {}, descBox, " descending"), " ",
        queryInput, " ", queryNote,
      ),
      scroller,
      talk,
    ),
  );

  function set(name, value) {
    model.set(name, value);
    model.save_changes();
  }

  function draw() {
    const steps = model.get("steps") || [];
    const runs = model.get("runs") || [];
    const params = model.get("params") || {};
    const cells = model.get("cells") || {};
    const diffs = model.get("diffs") || {};
    const differs = model.get("differs") || {};
    const notes = model.get("notes") || {};
    const edited = model.get("edited") || {};
    const alike = model.get("alike") || [];
    const answers = model.get("answers") || [];
    const baseline = model.get("baseline");
    const divergence = model.get("first_divergence");
    const mode = model.get("mode");
    const values = model.get("values");
    const groups = model.get("groups") || runs.map((r) => [r]);
    const grouped = model.get("group");
    const hideEqual = model.get("hide_equal");
    const rowsLayout = model.get("transposed");
    const compact = model.get("compact");
    const chosen = model.get("columns") || [];
    const loops = model.get("loops") || {};
    const facts = model.get("facts") || {};
    const marks = model.get("_marks") || {};
    const order = model.get("order") || runs;
    compactBox.checked = compact;
    alignSelect.value = model.get("align");
    descBox.checked = model.get("descending");
    if (document.activeElement !== queryInput) queryInput.value = model.get("query");
    queryNote.textContent = model.get("query_error") || (order.length < runs.length ? `${order.length} of ${runs.length} branches` : "");
    queryNote.classList.toggle("kx-query-bad", Boolean(model.get("query_error")));
    const paramNames = [...new Set(Object.values(facts).flatMap((f) => Object.keys(f.params || {})))];
    const sorts = [["", "branch order"], ["score", "score"], ["cost_usd", "cost"], ["length", "answer length"], ...paramNames.map((p) => [`param:${p}`, p])];
    sortSelect.replaceChildren(...sorts.map(([value, text]) => h("option", { value }, text)));
    sortSelect.value = model.get("sort_by");
    modeSelect.value = mode;
    valuesSelect.value = values;
    valuesLabel.style.display = answers.some(Boolean) ? "" : "none";
    layoutSelect.value = rowsLayout ? "rows" : "columns";
    groupBox.checked = grouped;
    // grouping says what it found, even when it can merge nothing
    const distinct = groups.length === runs.length;
    groupBox.disabled = distinct && !grouped;
    groupLabel.textContent = distinct
      ? ` group alike branches (all ${runs.length} distinct)`
      : ` group alike branches (${groups.length} distinct of ${runs.length})`;
    const equalCount = alike.filter(Boolean).length;
    hideBox.checked = hideEqual;
    hideLabel.textContent = ` hide equal steps (${equalCount} of ${steps.length})`;
    baseSelect.replaceChildren(...runs.map((r) => h("option", { value: r }, r)));
    baseSelect.value = baseline;
    banner.replaceChildren();
    if (divergence === null || divergence === undefined) {
      banner.append(h("span", { class: "kx-agree" }, `${runs.length} branches agree on all ${steps.length} steps`));
    } else {
      const row = steps.indexOf(divergence);
      const differ = runs.filter((r) => r !== baseline && (differs[r] || [])[row]).length;
      const jump = h("a", { class: "kx-jump", href: "#" }, divergence);
      jump.addEventListener("click", (event) => {
        event.preventDefault();
        scroller.querySelector(".kx-divergent")?.scrollIntoView({ block: "center", inline: "nearest" });
      });
      banner.append("first divergence: step ", jump, ` (${differ} of ${runs.length - 1} branches differ from ${baseline} there)`);
    }

    // a branch per run, or per group of runs whose every step is the same (shown by one of
    // them); the runs the filter keeps, in the chosen order
    const place = new Map(order.map((r, k) => [r, k]));
    const members = (grouped ? groups : runs.map((r) => [r]))
      .map((group) => group.filter((r) => place.has(r)))
      .filter((group) => group.length)
      .sort((a, b) => Math.min(...a.map((r) => place.get(r))) - Math.min(...b.map((r) => place.get(r))));
    const shown = members.map((group) => (group.includes(baseline) ? baseline : group[0]));
    const visible = steps.map((step, i) => (chosen.length ? chosen.includes(step) : !(hideEqual && alike[i])));
    stepBoxes.replaceChildren(
      ...steps.map((step, i) => {
        const box = h("input", { type: "checkbox", "data-step": step });
        box.checked = visible[i];
        box.addEventListener("change", () => {
          const now = steps.filter((s, k) => (s === step ? box.checked : visible[k]));
          set("columns", now.length ? now : [step]);
        });
        return h("label", { class: "kx-column-choice" + (alike[i] ? " kx-alike" : ""), title: alike[i] ? "alike in every branch" : "" }, box, step);
      }),
    );

    // the steps folded away: runs of consecutive steps alike in every branch
    function foldNote(from, to, extra = {}) {
      const names = steps.slice(from, to);
      const listed = names.length > 4 ? `${names.slice(0, 2).join(", ")} … ${names[names.length - 1]}` : names.join(", ");
      const note = h(
        "a",
        { class: "kx-fold", href: "#", title: names.join("\n"), ...extra },
        `⋯ ${plural(names.length, "step")} alike in every branch: ${listed} (show)`,
      );
      note.addEventListener("click", (event) => {
        event.preventDefault();
        set("hide_equal", false);
      });
      return note;
    }
    const folds = []; // [from, to) of each folded run of steps
    for (let i = 0; i < steps.length; i++) {
      if (visible[i]) continue;
      const from = i;
      while (i < steps.length && !visible[i]) i++;
      folds.push([from, i]);
    }

    function markControls(r) {
      const mark = marks[r] || {};
      const keep = h("input", { type: "checkbox", class: "kx-keep", title: "keep this branch (view.marks)" });
      keep.checked = Boolean(mark.keep);
      keep.addEventListener("change", () => set("_marks", { ...(model.get("_marks") || {}), [r]: { ...mark, keep: keep.checked } }));
      const note = h("input", { type: "text", class: "kx-note-input", placeholder: "note", value: mark.note || "", title: mark.note || "a note (view.marks)" });
      note.addEventListener("change", () => set("_marks", { ...(model.get("_marks") || {}), [r]: { ...mark, note: note.value } }));
      return [h("label", { class: "kx-keep-label" }, keep, "keep"), note];
    }

    function branchHead(group, r, tag) {
      const differing = (differs[r] || []).filter(Boolean).length;
      const how = r === baseline ? "baseline" : differing ? `differs at ${plural(differing, "step")}` : "same as baseline";
      const others = group.filter((m) => m !== r);
      const fact = facts[r] || {};
      const figures = [
        fact.score !== null && fact.score !== undefined ? `score ${Number(fact.score).toFixed(3)}` : null,
        fact.cost_usd !== null && fact.cost_usd !== undefined ? `$${Number(fact.cost_usd).toFixed(5)}` : null,
        fact.length !== null && fact.length !== undefined ? `${fact.length} words` : null,
      ].filter(Boolean).join(" · ");
      const classes = "kx-branch" + (r === baseline ? " kx-base" : "") + (r !== baseline && !differing ? " kx-same" : "") + ((marks[r] || {}).keep ? " kx-kept" : "");
      if (compact && rowsLayout) {
        return h(
          tag,
          { class: classes + " kx-compact-head", title: `${group.join(", ")}\n${params[r] || ""}\n${how}\n${figures}` },
          h("div", { class: "kx-line" }, h("span", { class: "kx-name" }, r, others.length ? ` +${others.length}` : ""), h("span", { class: "kx-how" }, figures || how)),
          h("div", { class: "kx-line kx-marks" }, ...markControls(r), params[r] ? h("span", { class: "kx-params" }, params[r]) : null),
        );
      }
      return h(
        tag,
        { class: classes, title: group.join(", ") },
        h("div", { class: "kx-name" }, ...breakable(r), others.length ? ` +${others.length}` : ""),
        params[r] ? h("div", { class: "kx-params", title: params[r] }, params[r]) : null,
        h("div", { class: "kx-how" }, others.length ? `${group.length} branches · ${how}` : how),
        figures ? h("div", { class: "kx-figures" }, figures) : null,
        h("div", { class: "kx-marks" }, ...markControls(r)),
        others.length ? h("div", { class: "kx-members" }, others.join(", ")) : null,
      );
    }

    function cell(r, i) {
      const text = (cells[r] || [])[i];
      const differing = r !== baseline && (differs[r] || [])[i];
      const answer = answers[i] && values === "text";
      const td = h("td", { class: (differing ? "kx-differs" : "") + (text === null || text === undefined ? " kx-missing" : "") });
      const said = (notes[r] || [])[i] || [];
      const mark = (edited[r] || [])[i] ? h("div", { class: "kx-edited", title: "recorded by a fork with a given result" }, "✎ edited") : null;
      const tight = compact && rowsLayout; // the answer grid: notes go in the cell's tools
      if ((said.length || mark) && !tight) td.append(h("div", { class: "kx-notes" }, mark, ...said.map((line) => h("div", { class: "kx-note" }, line))));
      let body;
      if (text === null || text === undefined) body = h("span", { class: "kx-none" }, "—");
      else if (mode === "diff" && differing) {
        const diff = diffs[r][i];
        body = diff.length && Array.isArray(diff[0]) ? wordDiff(diff) : lineDiff(diff);
      } else body = h(answer ? "div" : "pre", { class: answer ? "kx-answer" : "kx-cell" }, text);
      const loop = (loops[r] || [])[i] || [];
      const opened = model.get("opened") || [];
      const isOpen = opened[0] === r && opened[1] === steps[i];
      const tools = [];
      if (text !== null && text !== undefined && (answers[i] || loop.length)) {
        const calls = loop.length ? `${loop.length} steps: ${loop.join(" → ")}` : "conversation";
        const short = compact && rowsLayout ? (loop.length ? `⟲ ${loop.filter((s) => !s.startsWith(steps[i])).join(", ") || loop.length}` : "calls") : loop.length ? `⟲ ${calls}` : "conversation";
        const open = h("a", { class: "kx-open" + (isOpen ? " kx-opened" : ""), href: "#", title: `show the model calls as a conversation (${calls})` }, short);
        open.addEventListener("click", (event) => {
          event.preventDefault();
          set("opened", isOpen ? [] : [r, steps[i]]);
        });
        tools.push(open);
      }
      if (tight && (said.length || mark)) {
        const changed = h("span", { class: "kx-changes", title: [mark ? "✎ edited" : null, ...said].filter(Boolean).join("\n") }, mark ? "✎" : "", said.length ? `Δ${said.length}` : "");
        tools.unshift(changed);
      }
      if (compact && text !== null && text !== undefined) {
        body.classList.add("kx-clamped");
        const more = h("a", { class: "kx-more", href: "#" }, "more");
        more.addEventListener("click", (event) => {
          event.preventDefault();
          const clamped = body.classList.toggle("kx-clamped");
          more.textContent = clamped ? "more" : "less";
        });
        tools.unshift(more);
      }
      td.append(body);
      if (tools.length) td.append(h("div", { class: "kx-cell-tools" + (tight ? " kx-overlay" : "") }, ...tools));
      return td;
    }

    let table;
    if (!rowsLayout) {
      const cols = [h("col", { style: `width:${STEP_WIDTH}px` }), ...shown.map(() => h("col"))];
      const head = h("tr", {}, h("th", { class: "kx-step" }, "step"), ...members.map((group, k) => branchHead(group, shown[k], "th")));
      const rows = [];
      for (let i = 0; i < steps.length; i++) {
        const fold = folds.find(([from]) => from === i);
        if (fold) {
          rows.push(h("tr", { class: "kx-fold-row" }, h("td", { colspan: String(shown.length + 1) }, foldNote(...fold))));
          i = fold[1] - 1;
          continue;
        }
        const step = steps[i];
        rows.push(
          h(
            "tr",
            { class: (step === divergence ? "kx-divergent" : "") + (answers[i] ? " kx-answer-row" : ""), "data-step": step },
            h("th", { class: "kx-step", title: step }, step),
            ...shown.map((r) => cell(r, i)),
          ),
        );
      }
      table = h(
        "table",
        { class: "kx-table kx-by-columns", style: `min-width:${STEP_WIDTH + COLUMN_WIDTH * shown.length}px` },
        h("colgroup", {}, ...cols),
        h("thead", {}, head),
        h("tbody", {}, ...rows),
      );
    } else {
      const shownSteps = steps.map((_, i) => i).filter((i) => visible[i]);
      const branchWidth = compact ? COMPACT_BRANCH_WIDTH : BRANCH_WIDTH;
      const cols = [h("col", { style: `width:${branchWidth}px` }), ...shownSteps.map(() => h("col"))];
      const head = h(
        "tr",
        {},
        h("th", { class: "kx-step kx-corner" }, "branch"),
        ...shownSteps.map((i) => h("th", { class: "kx-step-head" + (steps[i] === divergence ? " kx-divergent" : ""), title: steps[i], "data-step": steps[i] }, steps[i])),
      );
      const rows = members.map((group, k) =>
        h("tr", { "data-run": shown[k] }, branchHead(group, shown[k], "th"), ...shownSteps.map((i) => cell(shown[k], i))),
      );
      table = h(
        "table",
        { class: "kx-table kx-by-rows" + (compact ? " kx-compact" : ""), style: `min-width:${branchWidth + STEP_COLUMN_WIDTH * shownSteps.length}px` },
        h("colgroup", {}, ...cols),
        h("thead", {}, head),
        h("tbody", {}, ...rows),
      );
    }
    const above = rowsLayout && !chosen.length && !compact ? folds.map((fold) => h("div", { class: "kx-fold-line" }, foldNote(...fold))) : [];
    scroller.replaceChildren(...above, table);
    drawTalk();
  }

  // the opened cell's model calls, as a conversation below the table
  function drawTalk() {
    const shown = model.get("conversation") || {};
    if (!shown.parts || !shown.parts.length) {
      talk.replaceChildren();
      return;
    }
    const close = h("a", { class: "kx-talk-close", href: "#" }, "close ×");
    close.addEventListener("click", (event) => {
      event.preventDefault();
      set("opened", []);
    });
    talk.replaceChildren(
      h("div", { class: "kx-talk-head" }, h("b", {}, shown.run_id), ` · ${shown.step} · ${plural(shown.parts.length, "step")} `, close),
      conversationView(shown.parts),
    );
  }

  modeSelect.addEventListener("change", () => set("mode", modeSelect.value));
  valuesSelect.addEventListener("change", () => set("values", valuesSelect.value));
  baseSelect.addEventListener("change", () => set("baseline", baseSelect.value));
  layoutSelect.addEventListener("change", () => set("transposed", layoutSelect.value === "rows"));
  groupBox.addEventListener("change", () => set("group", groupBox.checked));
  hideBox.addEventListener("change", () => set("hide_equal", hideBox.checked));
  compactBox.addEventListener("change", () => set("compact", compactBox.checked));
  alignSelect.addEventListener("change", () => set("align", alignSelect.value));
  sortSelect.addEventListener("change", () => set("sort_by", sortSelect.value));
  descBox.addEventListener("change", () => set("descending", descBox.checked));
  queryInput.addEventListener("change", () => set("query", queryInput.value));
  queryInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter") set("query", queryInput.value);
  });
  const names = [
    "steps", "runs", "params", "cells", "diffs", "differs", "notes", "edited", "alike", "answers", "baseline",
    "first_divergence", "mode", "values", "groups", "group", "hide_equal", "transposed", "compact", "columns",
    "align", "loops", "facts", "order", "_marks", "opened", "query_error",
  ];
  for (const name of names) model.on(`change:${name}`, draw);
  model.on("change:conversation", drawTalk);
  draw();
  return () => {
    for (const name of names) model.off(`change:${name}`, draw);
    model.off("change:conversation", drawTalk);
  };
}

export default { render };
