"""kassette.koto: Markdown-template state machines for coding agents, on kassette journals.

A template (Markdown with YAML front-matter) declares states, the evidence each accepts, the
gates that must pass and the transitions between them. The `koto` command drives a session
through it: `koto init` starts one, `koto next` says what to do and takes the evidence that
moves the machine, `koto rewind` goes back without losing the audit trail. Each session is a
kassette journal in a kassette storage (local files, or S3 with compare-and-swap), so
`kassette dump` and `kassette.explore` read it too. See docs/koto.md.

The modules: `template` (compile), `engine` (sessions and the advance loop), `gates`,
`context` (the content store), `sessions` (where sessions live), `config`, `export` (Mermaid
and HTML) and `cli`. This package imports nothing at import time, to keep `koto` fast.
"""
