"""kassette.koto: Markdown-template state machines for coding agents, on kassette journals.

A template (Markdown with YAML front-matter) declares states, the evidence each accepts, the
gates that must pass and the transitions between them. The `koto` command drives a session
through it: `koto init` starts one, `koto next` says what to do and takes the evidence that
moves the machine, `koto rewind` goes back without losing the audit trail. Each session is a
kassette journal in a kassette storage (local files, or S3 with compare-and-swap), so
`kassette dump` and `kassette.explore` read it too. See docs/koto.md.

Its modules are private (`_template`, ...): `template` (the compiled template;
`compile_template`), `compiler`, `checks` and `frontmatter` (source to compiled JSON, without
PyYAML), `session` (a session's state folded from its journal; init, rewind, cancel, status),
`engine` (`koto next`: the advance loop), `evidence` (what `--with-data` may hold),
`decisions`, `gates`, `context` (the content store), `store` (where sessions live, over
`LocalStorage` or `S3Storage`; `s3store` builds the latter), `names`, `config`, `export`
(Mermaid and HTML), `errors` and `cli`. Nothing is imported here, to keep `koto` fast.
"""

__all__: list[str] = []  # the `koto` command is the interface (docs/koto.md)
