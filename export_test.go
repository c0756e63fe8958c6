package orderstore

// FailSyncs makes every group-commit sync of app fail with err from now
// on, as a disk that reports a write-back error would.
func FailSyncs(app *Appliance, err error) { app.commit.fault.Store(&err) }
