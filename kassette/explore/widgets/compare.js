// CompareView's view: steps down the side (a frozen column), one column per branch, scrolling
// sideways; the first divergence named at the top and highlighted; values or diffs vs baseline.
// `h` (build an element) is dom.js's, prepended to this module in Python.

function diffBlock(lines) {
  return h(
    "pre",
    { class: "kx-cell kx-diff" },
    ...lines.map((line) =>
      h("span", { class: line.startsWith("+") ? "kx-add" : line.startsWith("-") ? "kx-del" : line.startsWith("@@") ? "kx-hunk" : "" }, line + "\n"),
    ),
  );
}

function render({ model, el }) {
  el.classList.add("kassette-compare", "jupyter-widgets");
  const banner = h("div", { class: "kx-banner" });
  const modeSelect = h("select", { class: "kx-mode", "aria-label": "show" },
    h("option", { value: "values" }, "values"),
    h("option", { value: "diff" }, "diff vs baseline"));
  const baseSelect = h("select", { class: "kx-baseline", "aria-label": "baseline" });
  const groupBox = h("input", { type: "checkbox", class: "kx-group" });
  const groupLabel = h("span", { class: "kx-group-label" });
  const scroller = h("div", { class: "kx-scroll" });
  el.append(
    h(
      "div",
      { class: "kx-root" },
      banner,
      h("div", { class: "kx-bar" }, "show ", modeSelect, " baseline ", baseSelect, " ", h("label", {}, groupBox, groupLabel)),
      scroller,
    ),
  );

  function draw() {
    const steps = model.get("steps") || [];
    const runs = model.get("runs") || [];
    const cells = model.get("cells") || {};
    const diffs = model.get("diffs") || {};
    const baseline = model.get("baseline");
    const divergence = model.get("first_divergence");
    const mode = model.get("mode");
    const groups = model.get("groups") || runs.map((r) => [r]);
    const grouped = model.get("group");
    modeSelect.value = mode;
    groupBox.checked = grouped;
    groupLabel.textContent = ` one column per distinct branch (${groups.length} of ${runs.length})`;
    baseSelect.replaceChildren(...runs.map((r) => h("option", { value: r }, r)));
    baseSelect.value = baseline;
    banner.replaceChildren();
    if (divergence === null || divergence === undefined) {
      banner.append(h("span", { class: "kx-agree" }, `${runs.length} branches agree on all ${steps.length} steps`));
    } else {
      const row = steps.indexOf(divergence);
      const differ = runs.filter((r) => r !== baseline && (diffs[r] || [])[row]?.length).length;
      const jump = h("a", { class: "kx-jump", href: "#" }, divergence);
      jump.addEventListener("click", (event) => {
        event.preventDefault();
        scroller.querySelector(".kx-divergent")?.scrollIntoView({ block: "center", inline: "nearest" });
      });
      banner.append("first divergence: step ", jump, ` (${differ} of ${runs.length - 1} branches differ from ${baseline} there)`);
    }
    // a column per run, or per group of runs whose every step is the same (shown by one of them)
    const columns = grouped ? groups : runs.map((r) => [r]);
    const shown = columns.map((members) => (members.includes(baseline) ? baseline : members[0]));
    const header = (members, r) => {
      const differing = (diffs[r] || []).filter((lines) => lines.length).length;
      const how = r === baseline ? "baseline" : differing ? `differs at ${differing} step${differing === 1 ? "" : "s"}` : "same as baseline";
      const others = members.filter((m) => m !== r);
      return h(
        "th",
        { class: (r === baseline ? "kx-base" : "") + (r !== baseline && !differing ? " kx-same" : ""), title: members.join(", ") },
        h("div", { class: "kx-name" }, r, others.length ? ` +${others.length}` : ""),
        h("div", { class: "kx-how" }, others.length ? `${members.length} branches · ${how}` : how),
        others.length ? h("div", { class: "kx-members" }, others.join(", ")) : null,
      );
    };
    const head = h("tr", {}, h("th", { class: "kx-step" }, "step"), ...columns.map((members, k) => header(members, shown[k])));
    const rows = steps.map((step, i) => {
      const base = (cells[baseline] || [])[i];
      return h(
        "tr",
        { class: step === divergence ? "kx-divergent" : "", "data-step": step },
        h("th", { class: "kx-step" }, step),
        ...shown.map((r) => {
          const text = (cells[r] || [])[i];
          const differs = r !== baseline && text !== base;
          const td = h("td", { class: (differs ? "kx-differs" : "") + (text === null ? " kx-missing" : "") });
          if (text === null || text === undefined) td.append(h("span", { class: "kx-none" }, "—"));
          else if (mode === "diff" && differs) td.append(diffBlock(diffs[r][i]));
          else td.append(h("pre", { class: "kx-cell" }, text));
          return td;
        }),
      );
    });
    scroller.replaceChildren(h("table", { class: "kx-table" }, h("thead", {}, head), h("tbody", {}, ...rows)));
  }

  modeSelect.addEventListener("change", () => {
    model.set("mode", modeSelect.value);
    model.save_changes();
  });
  baseSelect.addEventListener("change", () => {
    model.set("baseline", baseSelect.value);
    model.save_changes();
  });
  groupBox.addEventListener("change", () => {
    model.set("group", groupBox.checked);
    model.save_changes();
  });
  const names = ["steps", "runs", "cells", "diffs", "baseline", "first_divergence", "mode", "groups", "group"];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  return () => {
    for (const name of names) model.off(`change:${name}`, draw);
  };
}

export default { render };
