//go:build !linux

package main

import (
	"context"

	"go.uber.org/zap"
)

// heapHugePages: transparent huge pages are Linux's; elsewhere the heap is
// left to the system.
func heapHugePages(_ context.Context, on bool, log *zap.Logger) {
	log.Info("heap huge pages", zap.Bool("advised", false), zap.Bool("enabled", on))
}
