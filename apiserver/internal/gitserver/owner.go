package gitserver

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// notOwner refuses the push of a pod that no longer owns its project
// (docs/sync-modes.md §11): the pod sends the epoch of its claim in
// wire.HeaderOwnerEpoch, and a push whose epoch is not the one the
// project's ownership record holds is answered 409 `fenced` — a distinct
// answer the pod tells from a transient failure (it fences instead of
// degrading). A record that cannot be read is 503 (transient). A push
// without the header (a pod from before the record) is not checked.
func (s *Server) notOwner(c echo.Context, projectID string) error {
	h := c.Request().Header.Get(wire.HeaderOwnerEpoch)
	if h == "" || !httpmw.PrincipalFrom(c).Runtime() || s.Objects == nil {
		return nil
	}
	epoch, err := strconv.ParseInt(h, 10, 64)
	if err != nil || epoch <= 0 {
		return wire.Coded("invalid_owner_epoch", wire.HeaderOwnerEpoch+" must be a positive integer.")
	}
	rec, _, err := objstore.ReadOwnerRecord(c.Request().Context(), s.Objects, projectID)
	if err != nil && !errors.Is(err, objstore.ErrNotExist) {
		return wire.Unavailable(fmt.Errorf("reading the ownership record: %w", err))
	}
	if err == nil && rec.Epoch == epoch {
		return nil
	}
	return wire.Coded(wire.CodeFenced,
		fmt.Sprintf("fenced: another pod owns this project (the ownership record holds epoch %d, this push carries %d); this pod must stop writing", rec.Epoch, epoch))
}
