"""`python -m prov_trace` runs the command-line tool."""

from prov_trace.cli import main

if __name__ == "__main__":
    main()
