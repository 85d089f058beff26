// RunTree's view: a virtualized, foldable, searchable fork forest and the selected run's details.
// The model holds the forest as columns (JSON text in `_forest`) (id, label, status, color, depth, parent, end, note,
// edited, numbers), where end[i] is the index after run i's last descendant. Only the rows scrolled
// into view are in the DOM, so 10,000 runs draw as fast as 30. A forest too large to save with
// the notebook is not in `_forest` (""): the view asks the kernel for it (see `loadForest`).
// `h` (build an element) is dom.js's, prepended to this module in Python.

const ROW = 24; // px per tree row
const OVERSCAN = 8; // rows drawn beyond the visible ones
const SHORT = 120; // characters of a folded value shown before "click to expand"
const INDENT = 14; // px per depth level
const MAX_INDENT = 30; // levels; deeper chains show their depth as a number
const DARK_LUMINANCE = 0.0056 + 0.05; // #111's relative luminance, plus WCAG's flare term

// JSON text with a line-break opportunity (<wbr>) after each `,` `:` `{` `[` outside strings,
// so a narrow cell wraps between tokens; the cell's `overflow-wrap: anywhere` cuts inside a token
// only when one token is wider than the cell. Text that is not JSON wraps as it is.
function breakable(text) {
  const parts = [];
  let from = 0;
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === "\\") i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === "," || c === ":" || c === "{" || c === "[") {
      parts.push(text.slice(from, i + 1), h("wbr"));
      from = i + 1;
    }
  }
  parts.push(text.slice(from));
  return parts;
}

// The text colour, near-black or white, that contrasts more with a background colour (WCAG's
// ratio of relative luminances): dark on the light viridis bins and on orange, white elsewhere.
function ink(color) {
  const hex = /^#([0-9a-f]{3}|[0-9a-f]{6})$/i.exec(color || "")?.[1];
  if (!hex) return "#fff";
  const full = hex.length === 3 ? [...hex].map((d) => d + d).join("") : hex;
  const [r, g, b] = [0, 2, 4].map((at) => {
    const c = parseInt(full.slice(at, at + 2), 16) / 255;
    return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  const light = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  return (light + 0.05) / DARK_LUMINANCE > 1.05 / (light + 0.05) ? "#111" : "#fff";
}

// A value's cell: whole, or folded when Python sent its unfolded text `full` (a long value, as
// `pretty_json` shows it: the widgets' one pretty JSON).
function valueCell(text, full) {
  const cell = h("td", { class: "kx-value" });
  if (full == null) {
    cell.append(...breakable(text));
    return cell;
  }
  let open = false;
  const draw = () => {
    cell.replaceChildren();
    if (open) {
      cell.append(h("pre", { class: "kx-full" }, full));
    } else {
      cell.append(...breakable(text.slice(0, SHORT)), h("span", { class: "kx-more" }, ` … (${text.length} chars)`));
    }
    cell.title = open ? "click to fold" : "click to expand";
  };
  cell.classList.add("kx-long");
  cell.addEventListener("click", (event) => {
    if (open && window.getSelection()?.toString()) return; // selecting text, not folding
    open = !open;
    draw();
    event.stopPropagation();
  });
  draw();
  return cell;
}

// The search box's words: `name>1`, `name<=0.002`, `name=3`, `name!=0` compare a number (the
// forest's `numbers` columns: the runs table's and the params'); any other word must appear in
// the run's id, status, params or marks. Spaces around the operator are allowed.
const COMPARE = /^([A-Za-z_][\w.]*)(<=|>=|!=|==|=|<|>)(-?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)$/i;
const TESTS = {
  "<": (a, b) => a < b,
  "<=": (a, b) => a <= b,
  ">": (a, b) => a > b,
  ">=": (a, b) => a >= b,
  "=": (a, b) => a === b,
  "==": (a, b) => a === b,
  "!=": (a, b) => a !== b,
};

// The query as tests of a row: {words, numeric: [[values, test, number]], unknown: [names]}.
function parseQuery(text, numbers) {
  const words = [];
  const numeric = [];
  const unknown = [];
  const tokens = text.trim().replace(/\s*(<=|>=|!=|==|=|<|>)\s*/g, "$1").split(/\s+/).filter(Boolean);
  for (const token of tokens) {
    const found = COMPARE.exec(token);
    if (!found) {
      words.push(token.toLowerCase());
      continue;
    }
    const values = numbers?.[found[1]];
    if (values) numeric.push([values, TESTS[found[2]], Number(found[3])]);
    else unknown.push(found[1]);
  }
  return { words, numeric, unknown };
}

function matchesQuery(query, data, i) {
  for (const [values, test, number] of query.numeric) {
    const value = values[i];
    if (value === null || value === undefined || !test(value, number)) return false;
  }
  if (!query.words.length) return true;
  const text = `${data.id[i]} ${data.status[i]} ${data.note[i]} ${data.edited[i] ? "edited" : ""}`.toLowerCase();
  return query.words.every((word) => text.includes(word));
}

// The details panel's model calls: a link on each model-call entry, and the opened one shown
// as a conversation (conversation.js) above the entries.
function conversationLink(model, entry) {
  if (!(model.get("llm_offsets") || []).includes(entry.offset)) return null;
  const opened = model.get("conversation_offset") === entry.offset;
  const link = h("a", { class: "kx-conversation-link" + (opened ? " kx-opened" : ""), href: "#", title: "show as a conversation" }, opened ? "💬 shown" : "💬 conversation");
  link.addEventListener("click", (event) => {
    event.preventDefault();
    event.stopPropagation();
    model.set("conversation_offset", opened ? -1 : entry.offset);
    model.save_changes();
  });
  return h("div", {}, link);
}

function conversationPanel(model) {
  const shown = model.get("conversation") || {};
  if (!shown.messages) return null;
  const close = h("a", { class: "kx-conversation-close", href: "#" }, "close ×");
  close.addEventListener("click", (event) => {
    event.preventDefault();
    model.set("conversation_offset", -1);
    model.save_changes();
  });
  return h(
    "div",
    { class: "kx-conversation-panel" },
    h("div", { class: "kx-conversation-title" }, `model call at offset ${shown.offset ?? ""} `, close),
    conversationView([shown]),
  );
}

function render({ model, el }) {
  const started = performance.now();
  const collapsed = new Set();
  let visible = []; // row indexes shown, in order
  let matched = null; // Set of rows matching the filter, or null
  let drawnAt = -1;

  const legend = h("div", { class: "kx-legend kassette-legend" });
  const search = h("input", {
    class: "kx-search",
    type: "search",
    placeholder: "filter: words (run id, status, params) and numbers: temperature>1 cost_usd<0.002",
    "aria-label": "filter runs",
  });
  const count = h("span", { class: "kx-count" });
  const foldAll = h("button", { class: "kx-button", title: "fold every subtree" }, "fold all");
  const unfoldAll = h("button", { class: "kx-button", title: "unfold every subtree" }, "unfold all");
  const followBox = h("input", { type: "checkbox", class: "kx-follow-box" });
  const follow = h(
    "label",
    { class: "kx-follow", title: "select the run that started last, whenever the tree changes" },
    followBox,
    " follow newest",
  );
  const spacer = h("div", { class: "kx-spacer" });
  const forest = h("div", { class: "kx-forest kassette-forest", tabindex: "0" }, spacer);
  const details = h("div", { class: "kx-details kassette-details" });
  el.classList.add("kassette-run-tree", "jupyter-widgets"); // as an ipywidgets view's root
  el.append(
    h(
      "div",
      { class: "kx-root" },
      legend,
      h("div", { class: "kx-bar" }, search, count, foldAll, unfoldAll, follow),
      h("div", { class: "kx-body" }, forest, details),
    ),
  );

  let parsed = null;
  const columns = () => (parsed ??= loadForest());
  const size = () => (columns().id || []).length;

  function drawLegend() {
    legend.replaceChildren(
      ...(model.get("legend") || []).map(([name, color]) =>
        h("span", { class: "kx-swatch" }, h("span", { style: `background:${color}` }), name),
      ),
    );
  }

  function computeVisible() {
    const data = columns();
    const n = size();
    visible = [];
    const query = parseQuery(search.value, data.numbers);
    if (query.words.length || query.numeric.length || query.unknown.length) {
      matched = new Set();
      const keep = new Uint8Array(n);
      for (let i = 0; i < n && !query.unknown.length; i++) {
        if (matchesQuery(query, data, i)) {
          matched.add(i);
          for (let p = i; p >= 0 && !keep[p]; p = data.parent[p]) keep[p] = 1;
        }
      }
      for (let i = 0; i < n; i++) if (keep[i]) visible.push(i);
      count.textContent = `${matched.size.toLocaleString()} of ${n.toLocaleString()} runs`;
      if (query.unknown.length) {
        const known = Object.keys(data.numbers || {}).join(", ");
        count.textContent += ` (no number "${query.unknown.join('", "')}": ${known})`;
      }
    } else if (!data.id) {
      count.textContent = model.get("_forest_runs")
        ? `${model.get("_forest_runs").toLocaleString()} runs: loading from the kernel (run the cell if it stays)`
        : "0 runs";
    } else {
      matched = null;
      for (let i = 0; i < n; ) {
        visible.push(i);
        i = collapsed.has(i) ? data.end[i] : i + 1;
      }
      count.textContent = `${n.toLocaleString()} run${n === 1 ? "" : "s"}`;
    }
    spacer.style.height = `${visible.length * ROW}px`;
    forest.style.height = `${Math.min(Math.max(visible.length, 4), 18) * ROW + 2}px`;
    drawnAt = -1;
    drawRows(true);
  }

  function drawRows(force = false) {
    const first = Math.max(0, Math.floor(forest.scrollTop / ROW) - OVERSCAN);
    if (!force && first === drawnAt) return;
    drawnAt = first;
    const last = Math.min(visible.length, Math.ceil((forest.scrollTop + forest.clientHeight) / ROW) + OVERSCAN);
    const data = columns();
    const selected = model.get("selected");
    const rows = [];
    for (let k = first; k < last; k++) {
      const i = visible[k];
      const depth = data.depth[i];
      const folds = data.end[i] > i + 1;
      const toggle = h(
        "span",
        { class: "kx-toggle" + (folds ? "" : " kx-leaf"), "data-row": String(i) },
        folds ? (collapsed.has(i) && !matched ? "▸" : "▾") : "",
      );
      const indent = Math.min(depth, MAX_INDENT) * INDENT;
      // the whole row as a tooltip: a label or params cut with an ellipsis are read there
      const full = [data.label[i], data.status[i], data.note[i], data.edited[i] ? "✎ edited" : ""];
      const row = h(
        "div",
        {
          class:
            "kx-node kassette-node" +
            (data.id[i] === selected ? " kx-selected" : "") +
            (matched && !matched.has(i) ? " kx-context" : ""),
          style: `top:${k * ROW}px`,
          "data-run-id": data.id[i],
          "data-status": data.status[i],
          title: full.filter(Boolean).join(" · "),
          role: "treeitem",
        },
        indent ? h("span", { class: "kx-indent", style: `width:${indent}px` }) : null,
        toggle,
        depth > MAX_INDENT ? h("span", { class: "kx-depth" }, `↳${depth}`) : null,
        h(
          "span",
          {
            class: "kx-pill",
            // as wide as the row leaves beside the indentation and the toggle, then cut
            style: `background:${data.color[i]};color:${ink(data.color[i])};max-width:calc(100% - ${indent + INDENT + (depth > MAX_INDENT ? 40 : 0)}px)`,
          },
          data.label[i],
        ),
        data.note[i] ? h("span", { class: "kx-note" }, data.note[i]) : null,
        data.edited[i] ? h("span", { class: "kx-edited", title: "a copied step's result was edited in this fork" }, "✎ edited") : null,
        folds && collapsed.has(i) && !matched ? h("span", { class: "kx-hidden" }, `+${data.end[i] - i - 1}`) : null,
      );
      rows.push(row);
    }
    spacer.replaceChildren(...rows);
  }

  function reveal(runId) {
    const data = columns();
    const i = (data.id || []).indexOf(runId);
    if (i < 0) return;
    let opened = false;
    for (let p = data.parent[i]; p >= 0; p = data.parent[p]) if (collapsed.delete(p)) opened = true;
    if (opened) computeVisible();
    const k = visible.indexOf(i);
    if (k < 0) return;
    const top = k * ROW;
    if (top < forest.scrollTop || top + ROW > forest.scrollTop + forest.clientHeight) {
      forest.scrollTop = Math.max(0, top - forest.clientHeight / 2);
    }
    drawRows(true);
  }

  let shownAt = null; // the run and page drawn: another one starts at the panel's top
  function drawDetails() {
    const run = model.get("details") || {};
    const entries = model.get("entries") || [];
    const at = `${run.run_id} ${model.get("page") || 0}`;
    details.replaceChildren();
    if (at !== shownAt) {
      shownAt = at;
      details.scrollTop = 0;
    }
    if (!run.run_id) {
      details.append(h("p", { class: "kx-empty" }, "no run selected"));
      return;
    }
    const facts = [];
    for (const [key, name] of [
      ["version", "version"],
      ["started_at", "started"],
      ["ended_at", "ended"],
      ["working_s", "took (s)"], // the sessions' work, not the idle gaps between them
      ["waiting_s", "waited (s)"],
      ["sessions", "sessions"],
      ["steps", "steps"],
      ["llm_calls", "model calls"],
      ["input_tokens", "input tokens"],
      ["output_tokens", "output tokens"],
      ["params", "params"],
      ["error", "error"],
    ]) {
      const value = run[key];
      if (value !== null && value !== undefined && value !== "" && !(key === "params" && !run.params))
        facts.push([name, typeof value === "number" && !Number.isInteger(value) ? value.toFixed(3) : String(value)]);
    }
    if ((run.pending_events || []).length) facts.push(["waits for", run.pending_events.join(", ")]);
    details.append(
      h(
        "p",
        { class: "kx-title" },
        h("b", {}, run.run_id),
        " ",
        h("span", { class: "kx-status", style: `color:${run.color}` }, run.status),
        run.parent_run_id ? `, forked from ${run.parent_run_id} at offset ${run.fork_offset}` : "",
        run.edited ? h("span", { class: "kx-edited" }, "✎ edited") : null,
      ),
      h("dl", { class: "kx-facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    );
    if (run.status === "suspended" && (run.pending_events || []).length && model.get("can_resume")) {
      const event = h("select", { class: "kx-event" }, ...run.pending_events.map((e) => h("option", { value: e }, e)));
      const value = h("textarea", { class: "kx-json", rows: "2", placeholder: "value as JSON, e.g. {\"approved\": true}" });
      const press = h("button", { class: "kx-button kx-resume" }, "Resume");
      press.addEventListener("click", () => {
        try {
          if (value.value.trim()) JSON.parse(value.value);
        } catch (e) {
          model.set("message", `not JSON: ${e.message}`);
          model.save_changes();
          return;
        }
        model.send({ kind: "resume", event: event.value, value: value.value.trim() });
      });
      details.append(h("div", { class: "kx-resume-form" }, "resume ", event, " with ", value, press));
    }
    if (model.get("message")) details.append(h("p", { class: "kx-message" }, model.get("message")));
    const pages = model.get("pages") || 1;
    const page = model.get("page") || 0;
    if (pages > 1) {
      const go = (to) => () => {
        model.set("page", to);
        model.save_changes();
      };
      const first = entries.length ? entries[0].offset : 0;
      details.append(
        h(
          "div",
          { class: "kx-pager" },
          h("button", { class: "kx-button", onclick: go(page - 1), ...(page > 0 ? {} : { disabled: "" }) }, "◀"),
          ` entries from offset ${first} · page ${page + 1} of ${pages} `,
          h("button", { class: "kx-button", onclick: go(page + 1), ...(page + 1 < pages ? {} : { disabled: "" }) }, "▶"),
        ),
      );
    }
    const head = h("tr", {}, ...["offset", "session", "time (UTC)", "type", "id", "value"].map((t) => h("th", {}, t)));
    const body = h(
      "tbody",
      {},
      ...entries.map((e) =>
        h(
          "tr",
          {
            class: (e.copied ? "kx-copied" : "") + (e.edited ? " kx-edited-row" : ""),
            title: e.edited ? "edited: recorded in this fork with a given result, not run" : e.copied ? "copied from the source run" : "",
          },
          h("td", {}, e.offset),
          h("td", {}, e.session),
          h("td", { class: "kx-time" }, e.time),
          h("td", {}, e.type),
          h("td", {}, e.id, e.edited ? h("div", { class: "kx-edited" }, "✎ edited") : null, conversationLink(model, e)), // below: the column stays narrow
          valueCell(e.value, e.full),
        ),
      ),
    );
    const conversation = conversationPanel(model); // null when no model call is open: not "null"
    details.append(...(conversation ? [conversation] : []), h("table", { class: "kx-entries" }, h("thead", {}, head), body));
  }

  forest.addEventListener("scroll", () => requestAnimationFrame(() => drawRows()));
  forest.addEventListener("click", (event) => {
    const toggle = event.target.closest(".kx-toggle");
    if (toggle && !toggle.classList.contains("kx-leaf") && !matched) {
      const i = Number(toggle.dataset.row);
      if (!collapsed.delete(i)) collapsed.add(i);
      computeVisible();
      return;
    }
    const row = event.target.closest(".kx-node");
    if (row) {
      if (model.get("follow")) model.set("follow", false); // a run picked by hand: stay on it
      model.set("selected", row.dataset.runId);
      model.save_changes();
    }
  });
  forest.addEventListener("keydown", (event) => {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const data = columns();
    const k = visible.indexOf(data.id.indexOf(model.get("selected")));
    const next = visible[Math.min(visible.length - 1, Math.max(0, k + (event.key === "ArrowDown" ? 1 : -1)))];
    if (next !== undefined) {
      model.set("selected", data.id[next]);
      model.save_changes();
    }
    event.preventDefault();
  });
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(computeVisible, 120);
  });
  const foldTo = (fold) => () => {
    collapsed.clear();
    if (fold) {
      const data = columns();
      for (let i = 0; i < size(); i++) if (data.end[i] > i + 1 && data.depth[i] >= 0) collapsed.add(i);
    }
    computeVisible();
  };
  foldAll.addEventListener("click", foldTo(true));
  unfoldAll.addEventListener("click", foldTo(false));

  // The forest: from `_forest`, or, when it is too large to be saved with the notebook (""),
  // asked of the kernel, which answers with a "forest" message whose one buffer is its JSON.
  let asked = null; // the forest id asked for: once each
  function loadForest() {
    const text = model.get("_forest");
    if (text) return JSON.parse(text);
    const id = model.get("_forest_id");
    if (model.get("_forest_runs") && asked !== id) {
      asked = id;
      try {
        model.send({ kind: "forest", id });
      } catch (error) {
        // a saved notebook opened without its kernel: the count says to run the cell
      }
    }
    return {};
  }
  const onMessage = (message, buffers) => {
    if (message?.kind !== "forest" || message.id !== model.get("_forest_id") || !buffers?.length) return;
    parsed = JSON.parse(new TextDecoder().decode(buffers[0]));
    collapsed.clear();
    computeVisible();
    reveal(model.get("selected"));
  };
  const onFollow = () => {
    followBox.checked = Boolean(model.get("follow"));
  };
  followBox.addEventListener("change", () => {
    model.set("follow", followBox.checked);
    model.save_changes();
  });
  const onForest = () => {
    parsed = null;
    collapsed.clear();
    computeVisible();
  };
  const onSelected = () => {
    reveal(model.get("selected"));
    drawRows(true);
  };
  model.on("change:_forest", onForest);
  model.on("change:_forest_id", onForest);
  model.on("msg:custom", onMessage);
  model.on("change:follow", onFollow);
  model.on("change:legend", drawLegend);
  model.on("change:selected", onSelected);
  for (const name of ["details", "entries", "page", "pages", "message", "can_resume", "llm_offsets", "conversation"]) {
    model.on(`change:${name}`, drawDetails);
  }
  drawLegend();
  onFollow();
  computeVisible();
  drawDetails();
  requestAnimationFrame(() => {
    reveal(model.get("selected"));
    el.dataset.drawMs = String(Math.round(performance.now() - started));
  });
  return () => {
    model.off("change:_forest", onForest);
    model.off("change:_forest_id", onForest);
    model.off("msg:custom", onMessage);
    model.off("change:follow", onFollow);
    model.off("change:legend", drawLegend);
    model.off("change:selected", onSelected);
    for (const name of ["details", "entries", "page", "pages", "message", "can_resume", "llm_offsets", "conversation"]) {
      model.off(`change:${name}`, drawDetails);
    }
  };
}

export default { render };
