"""The fabric as data: specs, the port index, the rail-optimized generator, the topology file."""
