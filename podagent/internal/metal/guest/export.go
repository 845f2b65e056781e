package guest

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Exporter is what the export routes need of the pod.
type Exporter interface {
	// CommitAndPersist commits the live tree and persists .git into the
	// guest's own store.
	CommitAndPersist(ctx context.Context) error
	// OpenRepoArchive opens the persisted .git archive.
	OpenRepoArchive(ctx context.Context) (io.ReadCloser, error)
	// SnapshotHEAD writes HEAD's content as a tar.gz file and returns it.
	SnapshotHEAD(ctx context.Context) (string, error)
	// Workspace is the work tree.
	Workspace() string
}

// RegisterExport adds the export and poweroff routes to g (the runtime-token
// group). powerOff ends the VM after the answer is sent.
func RegisterExport(g *echo.Group, x Exporter, powerOff func()) {
	g.GET(internalapi.PodMetalExport+wire.MetalPartGit, func(c echo.Context) error {
		ctx := c.Request().Context()
		if err := x.CommitAndPersist(ctx); err != nil {
			return err
		}
		rc, err := x.OpenRepoArchive(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		return c.Stream(http.StatusOK, "application/gzip", rc)
	})
	g.GET(internalapi.PodMetalExport+wire.MetalPartData, func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentType, "application/gzip")
		c.Response().WriteHeader(http.StatusOK)
		_, err := WriteData(c.Response(), x.Workspace())
		return err
	})
	g.GET(internalapi.PodMetalExport+wire.MetalPartSrc, func(c echo.Context) error {
		path, err := x.SnapshotHEAD(c.Request().Context())
		if err != nil {
			return err
		}
		defer os.Remove(path)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return c.Stream(http.StatusOK, "application/gzip", f)
	})
	g.POST(internalapi.PodMetalPoweroff, func(c echo.Context) error {
		Sync()
		go func() {
			time.Sleep(50 * time.Millisecond) // let the answer leave before the VM ends
			powerOff()
		}()
		return c.JSON(http.StatusAccepted, map[string]string{"status": "powering off"})
	})
}

// WriteData writes the writable state of a workspace (project-data.tar.gz):
// the work tree as it is, tracked or not, without .git (which travels as
// repo.git.tar.gz).
func WriteData(w io.Writer, ws string) (archive.Stats, error) {
	return archive.CreateTarGz(w, ws, archive.CreateOptions{Level: 1, SkipVanished: true,
		Exclude: func(rel string, _ fs.DirEntry) bool { return rel == ".git" || filepath.Base(rel) == ".git.pre-hydrate" }})
}
