"""Developer tools that never run on a cluster: not shipped in jobs.zip."""
