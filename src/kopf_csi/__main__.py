"""`python -m kopf_csi ...` is `kopf-csi ...` (for when the console script is not on PATH)."""

from kopf_csi.cli import main

if __name__ == "__main__":
    main()
