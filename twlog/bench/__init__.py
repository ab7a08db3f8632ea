"""The C{twlog bench} commands: each prints a table of measured figures."""
