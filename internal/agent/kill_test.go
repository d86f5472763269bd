package agent

import "syscall"

// syscallKill probes whether pid exists.
func syscallKill(pid int) error {
	if err := syscall.Kill(pid, 0); err != nil {
		return err
	}
	// A zombie answers kill(0): check its state.
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
		return syscall.ESRCH
	}
	return nil
}
