"""The benchmark scenarios, one module a scenario or family of them (docs/running-benchmarks.md). They
print figures and assert nothing; ``bench.command`` runs them, and they import only ``bench.harness``
and each other."""
