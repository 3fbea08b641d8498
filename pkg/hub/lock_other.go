//go:build !unix

package hub

import "context"

// lockFile: without flock, downloads of one blob are not serialised; each
// still writes its own complete file before the rename.
func lockFile(ctx context.Context, path string) (func(), error) { return func() {}, nil }

func isNoSpace(err error) bool { return false }
