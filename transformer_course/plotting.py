"""The figures the notebooks draw more than once: heatmaps of matrices (encodings, attention, masks)."""
import matplotlib.pyplot as plt
import torch


def heatmap(matrix, ax=None, title=None, xlabel=None, ylabel=None, xticklabels=None, yticklabels=None,
            cmap="viridis", colorbar=True, **imshow_kwargs):
    """Draw a 2-D tensor or array as an image, row 0 at the top; returns the axes."""
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().float().cpu().numpy()
    if ax is None:
        _, ax = plt.subplots()
    image = ax.imshow(matrix, cmap=cmap, aspect="auto", interpolation="nearest", **imshow_kwargs)
    if colorbar:
        ax.figure.colorbar(image, ax=ax)
    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)), labels=xticklabels, rotation=90)
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)), labels=yticklabels)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax
