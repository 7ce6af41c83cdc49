"""The csi-snapshotter sidecar: VolumeSnapshotContents of our driver made real on the driver.

The port of external-snapshotter's per-driver sidecar (`pkg/sidecar-controller`). The cluster's
snapshot-controller still owns VolumeSnapshots: it creates and binds the contents, adds their
finalizer and marks them being deleted; this package only calls the driver for them.

- `options`: SnapshotterOptions, named after the Go flags, with their defaults;
- `decisions`: pure; which contents are ours, what a content needs next, names, patches;
- `parameters`: pure; the class parameters sent to CreateSnapshot, the secret templates;
- `errors`: the error type carrying Go's texts, and the final/non-final table;
- `operations`: the I/O, as one `Snapshotter` whose `sync(name)` a work queue drives.

Group snapshots (the `CSIVolumeGroupSnapshot` gate) are not ported: members of a group are
left alone.
"""
