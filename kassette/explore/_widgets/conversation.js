// A model call as a conversation (kassette/explore/_conversation.py's `call_view`): system, user,
// assistant turns with their tool calls, tool results, then the answer; the model, tokens and
// cost in its head; the raw journal entry one click away. Shared by CompareView and RunTree
// (prepended to their scripts in Python, after dom.js).

const ROLE_NAMES = { system: "system", user: "user", assistant: "assistant", tool: "tool result" };
const FOLDED_LINES = 8; // a message longer than this many lines opens folded

function toolCallText(call) {
  const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments, null, 2);
  return `${call.name ?? "?"}(${args ?? ""})`;
}

function messageView(message) {
  const role = message.role;
  const answer = Boolean(message.response);
  const label = answer ? (message.tool_calls?.length && !message.text ? "answer: tool call" : "answer") : ROLE_NAMES[role] || role;
  const head = h("div", { class: "kx-msg-role" }, label, message.name ? h("span", { class: "kx-msg-name" }, ` ${message.name}`) : null);
  const body = [];
  if (message.text) {
    const text = h("div", { class: "kx-msg-text" }, message.text);
    const lines = message.text.split("\n").length + message.text.length / 110;
    if (!answer && lines > FOLDED_LINES) {
      text.classList.add("kx-msg-folded");
      const more = h("a", { class: "kx-msg-more", href: "#" }, "show all");
      more.addEventListener("click", (event) => {
        event.preventDefault();
        const folded = text.classList.toggle("kx-msg-folded");
        more.textContent = folded ? "show all" : "fold";
      });
      body.push(text, more);
    } else body.push(text);
  }
  for (const call of message.tool_calls || []) body.push(h("pre", { class: "kx-msg-tool-call" }, "→ ", toolCallText(call)));
  return h("div", { class: `kx-msg kx-msg-${role}` + (answer ? " kx-msg-answer" : ""), "data-role": role }, head, ...body);
}

function money(cost) {
  if (cost === null || cost === undefined) return "cost unknown";
  return cost < 0.01 ? `$${cost.toFixed(6)}` : `$${cost.toFixed(4)}`;
}

// one model call: its head (step, model, tokens, cost, raw JSON toggle) and its messages
function callView(call) {
  const raw = h("pre", { class: "kx-raw", style: "display:none" }, call.raw);
  const toggle = h("a", { class: "kx-raw-toggle", href: "#" }, "raw JSON");
  toggle.addEventListener("click", (event) => {
    event.preventDefault();
    const hidden = raw.style.display === "none";
    raw.style.display = hidden ? "" : "none";
    toggle.textContent = hidden ? "conversation" : "raw JSON";
    messages.style.display = hidden ? "none" : "";
  });
  const tokens = `${(call.input_tokens ?? 0).toLocaleString("en")} in · ${(call.output_tokens ?? 0).toLocaleString("en")} out tokens`;
  const head = h(
    "div",
    { class: "kx-call-head" },
    h("b", {}, call.step_id),
    ` · ${call.model ?? call.provider} · ${tokens} · `,
    h("span", { class: "kx-cost" }, money(call.cost_usd)),
    call.finish_reason ? ` · ${call.finish_reason} · ` : " · ",
    toggle,
  );
  const messages = h("div", { class: "kx-msgs" }, ...(call.messages || []).map(messageView));
  return h("div", { class: "kx-call", "data-step": call.step_id }, head, messages, raw);
}

// a logical step's parts: model calls and, between them, the tool steps' results
function conversationView(parts) {
  return h(
    "div",
    { class: "kx-conversation" },
    ...parts.map((part) =>
      part.messages
        ? callView(part)
        : h("div", { class: "kx-call kx-tool-step", "data-step": part.step_id },
            h("div", { class: "kx-call-head" }, h("b", {}, part.step_id), " · tool step result"),
            h("div", { class: "kx-msg kx-msg-tool" }, h("div", { class: "kx-msg-text" }, part.tool))),
    ),
  );
}
