// Shared by the widgets' views: anywidget loads each widget's script as one ES module, so this
// file is prepended to each of them in Python (kassette/explore/_widgets/_assets.py).

// An element: h("td", {class: "x", style: "...", onclick: f, title: "t"}, child, "text", ...).
function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
