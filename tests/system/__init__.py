"""End-to-end tests: the command line, whole jobs and subprocess runs, with faults injected for real."""
