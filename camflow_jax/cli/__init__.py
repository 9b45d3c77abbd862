"""What the command lines share and the library never imports: the harness (:mod:`.harness`:
errors, signals, shared flags) and the process settings applied before any work
(:mod:`.runtime`: huge pages for malloc)."""
