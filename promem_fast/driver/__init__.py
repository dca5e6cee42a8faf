"""How the engine runs many session programs at once.

:mod:`.state` holds one session in flight, :mod:`.kinds` what each request kind costs (building, calling,
settling), :mod:`.continuous` the scheduler of the default driver and :mod:`.lanes` its executors (one
thread per backend), :mod:`.rounds` the round-synchronous driver kept for comparison.
"""
