package sandbox

import (
	"context"
	"fmt"
	"path"
	"slices"

	cerrdefs "github.com/containerd/errdefs"
)

// ImageConfig is what a workspace of an image takes from the image
// itself: where its commands start, their environment and user.
type ImageConfig struct {
	// WorkDir is the image's WORKDIR ("" when it sets none).
	WorkDir string
	// Env is the image's ENV, as KEY=value.
	Env []string
	// User is the image's USER ("" is root).
	User string
	// Volumes are the image's VOLUME paths, sorted.
	Volumes []string
}

// ImageConfig inspects image on the daemon. An image the daemon lacks is
// an error saying so.
func (d *Docker) ImageConfig(ctx context.Context, image string) (ImageConfig, error) {
	cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	insp, err := d.cli.ImageInspect(cctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return ImageConfig{}, fmt.Errorf("sandbox: docker: the daemon has no image %s", image)
		}
		return ImageConfig{}, errDaemon("inspect image "+image, err)
	}
	var c ImageConfig
	if cfg := insp.Config; cfg != nil {
		c.WorkDir, c.Env, c.User = cfg.WorkingDir, cfg.Env, cfg.User
		for v := range cfg.Volumes {
			c.Volumes = append(c.Volumes, path.Clean(v))
		}
		slices.Sort(c.Volumes)
	}
	return c, nil
}
