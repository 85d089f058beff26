"""A real Inspect AI eval, run offline: `python -m tests.explore.inspect_support LOG_DIR`.

Two samples, two epochs, a tool (`add`) the model calls, and the `includes` scorer, on
Inspect's own `mockllm/model` given its answers (a tool call, then a text, per generate
loop). Prints the log's path.
"""

from __future__ import annotations

import sys

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import Tool, tool


@tool
def add() -> Tool:
    async def execute(x: int, y: int) -> int:
        """Add two numbers.

        Args:
            x: First number.
            y: Second number.
        """
        return x + y

    return execute


def main(log_dir: str) -> None:
    outputs = []
    for y in range(4):  # each generate loop: a tool call, then the answer
        call = ModelOutput.for_tool_call("mockllm/model", "add", {"x": 1, "y": y})
        text = ModelOutput.from_content("mockllm/model", f"The answer is {1 + y}.")
        for output in (call, text):  # given usage: mockllm would count tokens with tiktoken
            output.usage = ModelUsage(input_tokens=12, output_tokens=6, total_tokens=18)
        outputs += [call, text]
    task = Task(
        dataset=[
            Sample(input="What is 1+0?", target="1", id="one"),
            Sample(input="What is 1+1?", target="2", id="two"),
        ],
        solver=[use_tools(add()), generate()],
        scorer=includes(),
        epochs=2,
    )
    model = get_model("mockllm/model", custom_outputs=outputs)
    (log,) = eval(task, model=model, log_dir=log_dir, display="none", max_samples=1)
    print(log.location)


if __name__ == "__main__":
    main(sys.argv[1])
