"""The README's five lines of `kx`: the store `make lab` writes, in the explorer.

In a notebook in notebooks/ after `make lab` (or, anywhere, after
`python examples/demo_store.py demo-store`): the run tree of every run in the store, and the
20 branches of the support agent's fan-out side by side. Outside a notebook the widgets print
as text.
"""

from IPython.display import display

from kassette import explore as kx

journals = kx.load("demo-store")  # every run: .runs, .entries, .llm_calls (pandas frames)
branches = [f"support-1.draft-reply.{number}" for number in range(20)]  # the fan-out
display(kx.RunTree(journals, selected=branches[0]))  # the fork tree: click a run
kx.CompareView(journals, ["support-1", *branches])  # the 20 answers side by side
