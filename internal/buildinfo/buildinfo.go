// Package buildinfo holds the version and commit stamped into the binary at
// build time with -ldflags "-X github.com/txsink/txsink/internal/buildinfo.Version=…".
package buildinfo

import "runtime/debug"

// Set at build time; defaults describe a development build.
var (
	Version = "0.1.0-dev"
	Commit  = ""
)

// CommitID returns Commit, or the VCS revision Go recorded, or "unknown".
func CommitID() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}
