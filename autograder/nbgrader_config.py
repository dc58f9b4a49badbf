# nbgrader configuration of the course. The release tool (python -m autograder release) uses it, and an
# instructor copies it into their own course directory (see the README, "For instructors").
c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "transformer-course"

# What a student sees in place of a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Time limit per cell while grading (nbgrader always runs on past errors, so one broken exercise
# costs only its own tests). Notebook 07 trains a small model, hence the generous limit.
c.Execute.timeout = 600
