"""mlab tasks as Inspect AI tasks (`inspect eval mlab/TASK`): the agent's tools run in mlab's sandbox on the run's
workspace, the task's own scorer scores it, and the run is written as an mlab run folder."""
