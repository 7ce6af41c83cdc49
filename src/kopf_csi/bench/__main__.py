"""`python -m kopf_csi.bench`: see `kopf_csi.bench.running`."""

from kopf_csi.bench.running import main

if __name__ == "__main__":
    main()
