// CompareView's view: one column per branch (steps down a frozen column), or transposed, one
// row per branch and a column per step; the first divergence named at the top and
// highlighted; values or diffs vs the baseline; steps alike in every branch folded to a line.
// `h` (build an element) is dom.js's, prepended to this module in Python.

const STEP_WIDTH = 84; // px: the step column (columns layout)
const COLUMN_WIDTH = 96; // px: a branch's narrowest column: 10 branches and the steps in 1,044 px
const BRANCH_WIDTH = 168; // px: the branch column (rows layout)
const STEP_COLUMN_WIDTH = 300; // px: a step's narrowest column (rows layout)

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
    h("option", { value: "rows" }, "a row per branch (transposed)"));
  const groupBox = h("input", { type: "checkbox", class: "kx-group" });
  const groupLabel = h("span", { class: "kx-group-label" });
  const hideBox = h("input", { type: "checkbox", class: "kx-hide-equal" });
  const hideLabel = h("span", { class: "kx-hide-label" });
  const scroller = h("div", { class: "kx-scroll" });
  el.append(
    h(
      "div",
      { class: "kx-root" },
      banner,
      h(
        "div",
        { class: "kx-bar" },
        "show ", modeSelect, valuesLabel, " baseline ", baseSelect, " ", layoutSelect, " ",
        h("label", {}, hideBox, hideLabel), " ", h("label", {}, groupBox, groupLabel),
      ),
      scroller,
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

    // a branch per run, or per group of runs whose every step is the same (shown by one of them)
    const members = grouped ? groups : runs.map((r) => [r]);
    const shown = members.map((group) => (group.includes(baseline) ? baseline : group[0]));
    const visible = steps.map((_, i) => !(hideEqual && alike[i]));

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

    function branchHead(group, r, tag) {
      const differing = (differs[r] || []).filter(Boolean).length;
      const how = r === baseline ? "baseline" : differing ? `differs at ${plural(differing, "step")}` : "same as baseline";
      const others = group.filter((m) => m !== r);
      return h(
        tag,
        { class: "kx-branch" + (r === baseline ? " kx-base" : "") + (r !== baseline && !differing ? " kx-same" : ""), title: group.join(", ") },
        h("div", { class: "kx-name" }, ...breakable(r), others.length ? ` +${others.length}` : ""),
        params[r] ? h("div", { class: "kx-params", title: params[r] }, params[r]) : null,
        h("div", { class: "kx-how" }, others.length ? `${group.length} branches · ${how}` : how),
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
      if (said.length || mark) td.append(h("div", { class: "kx-notes" }, mark, ...said.map((line) => h("div", { class: "kx-note" }, line))));
      if (text === null || text === undefined) td.append(h("span", { class: "kx-none" }, "—"));
      else if (mode === "diff" && differing) {
        const diff = diffs[r][i];
        td.append(diff.length && Array.isArray(diff[0]) ? wordDiff(diff) : lineDiff(diff));
      } else td.append(h(answer ? "div" : "pre", { class: answer ? "kx-answer" : "kx-cell" }, text));
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
      const cols = [h("col", { style: `width:${BRANCH_WIDTH}px` }), ...shownSteps.map(() => h("col"))];
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
        { class: "kx-table kx-by-rows", style: `min-width:${BRANCH_WIDTH + STEP_COLUMN_WIDTH * shownSteps.length}px` },
        h("colgroup", {}, ...cols),
        h("thead", {}, head),
        h("tbody", {}, ...rows),
      );
    }
    const above = rowsLayout ? folds.map((fold) => h("div", { class: "kx-fold-line" }, foldNote(...fold))) : [];
    scroller.replaceChildren(...above, table);
  }

  modeSelect.addEventListener("change", () => set("mode", modeSelect.value));
  valuesSelect.addEventListener("change", () => set("values", valuesSelect.value));
  baseSelect.addEventListener("change", () => set("baseline", baseSelect.value));
  layoutSelect.addEventListener("change", () => set("transposed", layoutSelect.value === "rows"));
  groupBox.addEventListener("change", () => set("group", groupBox.checked));
  hideBox.addEventListener("change", () => set("hide_equal", hideBox.checked));
  const names = [
    "steps", "runs", "params", "cells", "diffs", "differs", "notes", "edited", "alike", "answers", "baseline",
    "first_divergence", "mode", "values", "groups", "group", "hide_equal", "transposed",
  ];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  return () => {
    for (const name of names) model.off(`change:${name}`, draw);
  };
}

export default { render };
