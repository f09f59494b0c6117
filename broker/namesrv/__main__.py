"""`python -m broker.namesrv`: the same as the `namesrvd` command."""

from tidemq.broker.daemons.namesrvd import main

if __name__ == "__main__":
    main(prog_name="namesrvd")
