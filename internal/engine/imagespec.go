package engine

// imageSpecVersion is the container layout that Engine.spec makes, which
// every memory image records (snapshot.WriteSpec, snapshot.CheckSpec).
// runsc restores an image only into a container with the same arguments
// and mounts, so every change of them bumps it:
//
//	(none) before: /tmp was bind-mounted from the writable layer
//	2      no /tmp mount; /etc/hostname from a host file
const imageSpecVersion = 2
