// Placeholder; replaced by the test utilities (subprocess helpers).
