package console

import "net/http"

func (c *Console) cooprPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Coopr == nil || !tokenOf(r).Admin() {
		c.notFound(w, r, "This loomd has no Coopr link: start it with --coopr-server to take tasks from a Coopr server (docs/coopr.md).")
		return
	}
	st := c.cfg.Coopr()
	c.render(w, r, http.StatusOK, "coopr", &view{Title: "Coopr link", Nav: "coopr", Topics: []string{topicCoopr}, Data: st})
}
