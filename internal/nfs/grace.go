package nfs

import (
	"context"
	"errors"
	"fmt"
)

// InGrace reports whether Ganesha is in its grace period, in which it lets
// NFSv4 clients reclaim their state and refuses new opens and locks
// (NFS4ERR_GRACE): the admin object's get_grace (nfs_admin_thread.c).
func (d *DBus) InGrace(ctx context.Context) (bool, error) {
	call, err := d.callObject(ctx, adminPath, adminIface, "get_grace")
	if err != nil {
		return false, fmt.Errorf("get grace: %w", err)
	}
	in, err := parseGrace(call.Body)
	if err != nil {
		return false, fmt.Errorf("get grace: %w", err)
	}
	return in, nil
}

// parseGrace reads get_grace's reply: (b in grace, b ok, s message); a
// refusal is only (b false, s message).
func parseGrace(body []any) (bool, error) {
	if len(body) == 2 {
		_, msg, err := parseStatus(body)
		if err != nil {
			return false, err
		}
		return false, errors.New(msg)
	}
	if len(body) != 3 {
		return false, fmt.Errorf("reply of %d fields", len(body))
	}
	ok, msg, err := parseStatus(body[1:])
	if err != nil {
		return false, err
	}
	if !ok {
		return false, errors.New(msg)
	}
	in, isBool := body[0].(bool)
	if !isBool {
		return false, fmt.Errorf("unexpected reply %v", body)
	}
	return in, nil
}
