"""The C{twlog} command: argument parsing in L{twlog.cli.main}, one module per command family."""
