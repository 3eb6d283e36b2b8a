"""Time: per-op roofline bounds, attained kernel rates, the calibrated step and the time quantities of a run."""
