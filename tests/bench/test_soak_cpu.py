"""``bench soak``'s CPU by role: a process that ends inside the window keeps its time in the count."""

import subprocess
import sys

import psutil

from bench.harness.sampling import CpuByRole, tree_cpu_seconds

BURN = """
import time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print(time.process_time())
"""


def test_a_child_that_ended_inside_the_window_is_counted_in_its_parent_once():
    me = psutil.Process().pid
    cpu = CpuByRole({"parent": [me]})
    cpu.start()
    # Run and reaped between the snapshots: alive at neither, so a sum over live processes would miss it.
    child = subprocess.run([sys.executable, "-c", BURN], capture_output=True, text=True, check=True)
    used = float(child.stdout)
    result = cpu.stop()
    assert used >= 0.3
    assert result["cpu_seconds_by_role"]["parent"] >= used * 0.9, result
    # The cores printed are those seconds over the window, to the printed figures' rounding: cores and the
    # window to 3 decimals (half a unit each, times the other factor), CPU seconds to 4.
    cores, seconds = result["cores_by_role"]["parent"], result["seconds"]
    rounding = 0.0005 * seconds + 0.0005 * cores + 0.00005
    assert abs(cores * seconds - result["cpu_seconds_by_role"]["parent"]) <= rounding + 1e-9, result
    # The driver is counted without its children: they are the roles' processes, counted there.
    assert result["cpu_seconds_by_role"]["bench_driver"] < used * 0.5, result
    assert set(result["cores_by_role"]) >= {"bench_driver", "postgresql", "redis"}


def test_a_process_that_is_gone_counts_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert tree_cpu_seconds(child.pid) == 0.0
