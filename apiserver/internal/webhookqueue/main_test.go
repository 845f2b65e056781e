package webhookqueue_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
