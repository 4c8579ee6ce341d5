//go:build !linux

package store

const noFollow = 0
