"""The top floor: reports that read every app's models (the state gauges of /metrics, the metrics server).
Nothing below imports it; it may import any app."""
