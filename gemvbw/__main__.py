from gemvbw.cli import entry

entry()
