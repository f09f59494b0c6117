"""`python -m tidemq.client.dashboard`: the same as `tidemq-dashboard`."""

from tidemq.client.dashboard.cli import main

if __name__ == "__main__":
    main()
