"""external-resizer: PVC size increases become ControllerExpandVolume calls, VolumeAttributesClass
changes become ControllerModifyVolume calls.

What belongs here: the pure decisions (which size to expand to, what the claim's status says
next, which gRPC codes are final or infeasible), the options, and the operations that read the
caches, call the driver and write the claims and volumes. What does not: kopf (the handlers
in `handlers/resizer.py` adapt it), and any watch of pods (a claim's users are looked up only
after a driver said "volume in use"; see `inuse`).
"""
