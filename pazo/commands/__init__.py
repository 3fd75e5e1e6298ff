"""How every command starts and ends: the one start (`start`: plugins, the console, exit codes, a
reader that went away), a Ctrl-C before the work starts as one line and exit 130 (`interrupts`), and
the run messages on the terminal (`console`)."""
