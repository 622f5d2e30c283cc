"""One module per `sizing` subcommand: its arguments, cheap to declare, and what it runs, imported only when it runs."""
