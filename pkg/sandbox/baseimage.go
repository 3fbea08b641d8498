package sandbox

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// baseRecipe is the local base image's recipe; scripts/docker-setup.sh
// reads the same file and tags what it builds the same way.
//
//go:embed baseimage.recipe
var baseRecipe []byte

// BaseImageRepo is the repository of the local base image.
const BaseImageRepo = "rllm-base"

// BaseImage is the tag of the local base image that scripts/docker-setup.sh
// builds from Debian's packages: rllm-base:<the first 12 hex digits of the
// SHA-256 of pkg/sandbox/baseimage.recipe>. It is sandbox.docker.image's
// default.
func BaseImage() string {
	sum := sha256.Sum256(baseRecipe)
	return BaseImageRepo + ":" + hex.EncodeToString(sum[:])[:12]
}
