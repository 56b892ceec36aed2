//go:build !linux || android

package virtio
