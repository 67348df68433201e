"""One module per CLI subcommand: `configure(parser)` stays import-light, `run(args)` works."""
