package sandbox

// Configured is the configuration Configure last set (the defaults when
// it was never called): what other engines of the process (the task
// env's docker backend) open with, so sandbox.* acts on them too.
func Configured() Config {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.set {
		return Config{Backend: BackendAuto, Limits: DefaultLimits}
	}
	return shared.cfg
}
