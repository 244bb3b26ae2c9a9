"""What every job shares: flags, runners, CSV rows, shard files, the run folder and its lock, run errors,
progress, reports, contact sheets, embedding types and the one launcher skeleton. Imports no job."""
