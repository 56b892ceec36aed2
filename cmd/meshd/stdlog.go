package main

import "log/slog"

// routeStdLog makes l, with lib=log, the process's default slog logger, so
// that what a linked library prints through the standard library's log
// package (bbolt's funlock error, netlink's unknown attributes) joins the
// one log stream at info: log_format, log_level and, under systemd, the
// journald priority apply to it as to meshd's own lines.
func routeStdLog(l *slog.Logger) {
	slog.SetDefault(l.With("lib", "log"))
}
