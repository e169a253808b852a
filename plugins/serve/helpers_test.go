package serve

import (
	"testing"

	"github.com/leasekeeper/leasekeeper/plugins/internal/plugintest"
)

func TestMain(m *testing.M) { plugintest.Main(m) }
