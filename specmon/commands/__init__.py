"""One module per CLI subcommand: `configure(parser)` stays import-light, `run(args)` works.

`sweep_session` is no subcommand: it holds what the two sweep commands share."""
