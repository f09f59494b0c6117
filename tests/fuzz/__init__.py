"""Coverage-guided fuzzing of the decoders that read bytes from outside (issue 20).

`targets.py` defines the targets and their property; `run.py` runs one under atheris (libFuzzer)
in a process of its own; `python -m tests.fuzz` runs them all (`make fuzz`) and reports the
executions of each and the inputs that broke it; `corpus/<target>/` holds the checked-in seeds,
which `seeds.py` writes from the real encoders; `test_fuzz.py` (part of `make test`) replays the
seeds and every known crash, and runs each target briefly from its seeds.
"""
