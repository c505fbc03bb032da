"""Running a training script under nsys: command line, XLA flags, run directories."""
