"""Image tasks on the process backend: the task image's root filesystem unpacked once per host with its owners
shifted into a range of host ids, each step an overlay of it under bubblewrap in a user namespace that maps that
range back to 0..65535, so the agent is root over its own files and nobody on the host."""
