"""`python -m devtools.bench`: see `devtools.bench.running`."""

from devtools.bench.running import main

if __name__ == "__main__":
    main()
