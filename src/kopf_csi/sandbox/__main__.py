"""`python -m kopf_csi.sandbox`: see `kopf_csi.sandbox.running`."""

from kopf_csi.sandbox.running import main

if __name__ == "__main__":
    main()
