package sentry

// helperEnv names the helper mode when the test binary re-executes itself.
const helperEnv = "GVX_SENTRY_TEST_HELPER"

func runHelper(mode string) int { return 2 }
